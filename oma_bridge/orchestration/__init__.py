"""OpenMultiAgent: run_agent, tracing and online evaluation; team runs (docs/teams.md).

Team runs: ``tasks`` (the task model and its checks), ``roster`` (members and
the agents made of them), ``scheduler`` (the DAG), ``prompts`` (every text
sent), ``planner`` (reading a coordinator's plan), ``outcome`` (results) and
``teams`` (one run, from the checks to the result).
"""
