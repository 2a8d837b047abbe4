"""corral.grammar: llama.cpp GBNF grammars built from JSON Schemas (structured output) and from tool
definitions (tool calls), shared by the frontend (which refuses what cannot compile) and the llama.cpp backend."""
