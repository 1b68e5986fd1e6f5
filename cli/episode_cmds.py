"""Commands of this group (placeholder until implemented)."""

commands: list = []
