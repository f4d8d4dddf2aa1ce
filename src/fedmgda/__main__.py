from fedmgda.cli import main

raise SystemExit(main())
