"""Strata from Python."""
