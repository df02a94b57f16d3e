"""The input side: text → located YAML nodes → validated spec data → Job."""
