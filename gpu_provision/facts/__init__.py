"""pyinfra facts of this project."""
