"""The dual agent (Xing et al., KDD 2023): features, the ordering network, the RWGP model."""
