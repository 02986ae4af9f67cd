"""Training: configuration, optimizers and schedules, checkpoints, the trainer, distillation."""
