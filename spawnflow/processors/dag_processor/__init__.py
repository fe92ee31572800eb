"""The Dag processor: a manager (role ``dag-processor``, holds the database engine)
that parses each Dag file in a child of its own (role ``file-parser``, no database).

This package imports nothing: the parser child must not load the manager's modules
(and with them SQLAlchemy).
"""
