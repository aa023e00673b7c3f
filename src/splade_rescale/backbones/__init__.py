"""Where backbones come from (the Hub, a folder, a package, or a config: random init) and the
published SPLADE checkpoints (published_models); the tokenizers a config names are in
splade_rescale.tokenizers, which the config check uses too."""
