"""Shared vocabulary of freshindex: the error tree, identity hashing and the
plain data types that every other part passes around.

Nothing here does I/O or knows about a backend; every part may import it and
it imports no other part.
"""
