"""planc: a validator and plan compiler for distributed LLM training specs."""

__version__ = "0.1.0"
