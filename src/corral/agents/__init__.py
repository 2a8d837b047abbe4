"""corral.agents: the agent worker (MCP sessions with the official SDK, tool execution, agent jobs over NATS)
and the agent loop shared by the frontend and the worker."""
