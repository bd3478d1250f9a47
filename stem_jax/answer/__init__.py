"""Answers from traced evidence: ranking, the evidence subgraph, reasoning chains."""
