"""Tracing hooks: how the engine reports what it does (see DESIGN §3)."""
