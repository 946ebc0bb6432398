"""TEST STAND-INS for libraries that cannot be installed on this project's machines.

Nothing here is the real library. Each stand-in follows the real library's documented interface
closely enough to test our adapter's side (argument mapping, streaming loops, error paths); it is
put on sys.path only by the tests that use it, never by the bench itself.
"""
