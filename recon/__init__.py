"""recon: reads an SGLang tree and writes down what is slow, why, and what to do about it."""

__version__ = "0.1.0"
