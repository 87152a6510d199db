"""GSM8K with a calculator tool: an Agent-R1 ToolEnv recipe and the same task as a plain OpenAI-SDK agent."""
