"""Operator-launched followers that are not corral workers: a vLLM data-parallel rank (`corral p2p-worker vllm`)
and a ds4 layer-split worker (`corral worker ds4-distributed`). corral only starts them and, for vLLM, makes the
follower visible in the admin API as an agent-type node; the traffic between ranks is the engine's own."""
