"""Model configs and model files: the config schema (`config`) with its files confined to their roots (`roots`),
names (`names`: the one validator, model and backend names), aliases, the revision hash (`revision`),
capabilities, checkpoint size and GGUF header facts, and the default and tiny test models it can build.
"""
