"""OpenMultiAgent: run_agent, tracing and online evaluation."""
