"""Product search: filters, ranked text and nearest-first order at any catalogue size
(``criteria``, ``textmatch``, ``nearest``, ``plans``, ``service``), pages by signed cursor
(``cursor``, ``paging``), the answers and comparison across suppliers (``listing``), and
natural-language search: the rule-based query parser (``query``, ``vocabulary``) and the
engine's reading of a query (``extraction``), merged by ``ai_search``."""
