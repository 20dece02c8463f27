"""Train RELMAS in the accelerator simulator: imitation, then policy gradient."""
