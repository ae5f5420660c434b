"""The planner: its records, the gates, the stages, admission and its budgets, batches, the learned
ranking inside a plan, the launch circuit, an agent's proposals. The top of the core."""
