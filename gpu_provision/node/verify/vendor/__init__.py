"""Third-party modules shipped unchanged with the verification agent (see README.md)."""
