"""The pure decision core: records, the ports it talks through, and the cascade."""
