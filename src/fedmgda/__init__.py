"""fedmgda: reproduction package of Hu et al., Federated Learning Meets Multi-objective
Optimization (FedMGDA+). See README.md."""

__version__ = "0.1.0"
