"""The inference path, inside the µs budget: the OpenAI endpoints (`openai`, `fast_path`, `responses`,
`media`, `agent_chat`), their request bodies and the one list of fields (`schemas`, `request_fields`,
`media_requests`, `responses_request`), and what turns a backend's answer into OpenAI's (`choices`,
`logprobs`, `sse`, `tool_calls`, `structured_output`, `images`, `transcripts`, `speech_*`).
"""
