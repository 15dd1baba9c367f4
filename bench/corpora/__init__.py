"""Corpora for the golden sets: each module materialises one corpus and verifies its questions."""
