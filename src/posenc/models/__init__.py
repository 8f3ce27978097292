"""Model families and the builders that assemble them from parts (filled in by the redesign)."""
