"""Local stand-ins for AWS used by the tests and the embedded demo (not shipped to Lambda)."""
