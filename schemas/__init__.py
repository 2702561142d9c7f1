"""The manifest schema, shipped as package data."""
