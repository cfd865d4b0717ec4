"""End-to-end tests: the real daemon process, the shipped example config, loopback stand-ins."""
