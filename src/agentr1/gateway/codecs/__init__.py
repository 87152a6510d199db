"""The wire formats, each a thin codec over :class:`~agentr1.gateway.model_call.ModelCall`."""
