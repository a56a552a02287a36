"""Test support shared by every test suite: real servers, asyncio helpers. Fixtures that use
these are registered in ``tests/conftest.py``; the logic lives here."""
