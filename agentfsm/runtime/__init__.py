"""Filled in by a later issue."""
