"""Renderers: findings and analysis results to text (rich), JSON, DOT, Mermaid, files."""
