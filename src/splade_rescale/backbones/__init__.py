"""Where backbones come from (the Hub, a folder, a package, or a config: random init), configured
tokenizers, and the published SPLADE checkpoints (published_models)."""
