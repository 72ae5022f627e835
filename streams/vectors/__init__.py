"""Vector stores: canonical vectors per embedding model, searched inside a time window.

`edge.EdgeVectorStore` keeps them on disk in process (Qdrant Edge) for the embedded
runner; `qdrant_server.QdrantVectorStore` talks to a Qdrant server in production. Both
share the naming, id and tie-break rules in `common`, so they return the same verdicts.
"""
