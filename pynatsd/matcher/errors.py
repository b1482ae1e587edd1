"""Errors raised by the subscription index."""

from __future__ import annotations


class InvalidSubjectError(ValueError):
    """A subscription subject is not valid: an empty token, a token after ``>``, or whitespace."""
