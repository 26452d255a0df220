"""The differentiable operations, grouped by family; each ``Function`` keeps forward and backward side by side."""
