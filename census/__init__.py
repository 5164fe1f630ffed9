"""census: turns a Hugging Face config into a ModelSpec (no Prefect, no Hub)."""
