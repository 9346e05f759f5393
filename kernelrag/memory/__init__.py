"""What kernelrag remembers: the skill library (``skills``), the reasoning graph
(``graph``, its queries and export), and the locked, atomic storage under both."""
