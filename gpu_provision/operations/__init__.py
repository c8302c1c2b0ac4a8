"""pyinfra operations of this project."""
