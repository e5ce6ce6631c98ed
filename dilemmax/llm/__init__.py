"""Language models in the games: clients, the model as a policy, batched play (``llm`` extra)."""
