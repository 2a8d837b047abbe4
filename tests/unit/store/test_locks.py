from corral.store.locks import key_from_string


def test_lock_keys_match_the_reference_derivation() -> None:
    assert key_from_string("replica-reconciler") == 465212274928412116
    assert key_from_string("model-load:qwen3-0.6b") == 3406416548509500088
