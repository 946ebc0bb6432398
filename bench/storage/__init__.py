"""Results store: the `Store` protocol and its SQLite / PostgreSQL implementation, its
table layout, store URLs and copying between stores. Imports only bench.core.
"""
