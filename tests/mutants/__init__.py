"""Deliberately broken backends (one bug each) for the project's mutation test."""
