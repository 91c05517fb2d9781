"""Graph memory: typed nodes and links, exactly-once ingestion of trajectories, recall ranked by a
value function, and maintenance. Its public names are re-exported by `hippograph` itself
(docs/architecture.md, graph memory).
"""
