"""The engine every memory family shares: argument checks, the record envelope, scoring columns,
the query with its vector index, and the saved index files.

It works on ids, vectors and usage columns and imports no family; each family maps its own
records onto it (docs/architecture.md).
"""
