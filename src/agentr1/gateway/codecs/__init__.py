"""The wire formats: each module (``chat``, ``completions``, ``anthropic``, ``responses``) is a
:class:`~agentr1.gateway.wire.WireFormat` (decode, encode, stream) that the call owner,
:class:`~agentr1.gateway.model_call.ModelCall`, runs a call with; the other modules are what they share."""
