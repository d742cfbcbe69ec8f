"""The kernel: model-free helpers every app uses. It imports from no app."""
