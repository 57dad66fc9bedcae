"""Default and example node configuration files."""
