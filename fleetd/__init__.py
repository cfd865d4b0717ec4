"""fleetd: the per-node health daemon for AMD Instinct GPU servers that serve LLMs with vLLM."""

__version__ = "0.1.0"
