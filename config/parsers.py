from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class JSONBodyParser(JSONParser):
    """DRF's JSON parser, with a body nested too deeply for Python's decoder refused as 400.

    The standard library's decoder recurses once per `[` or `{`; about a thousand of
    them exhaust the interpreter's stack and raise RecursionError, which DRF does not
    treat as bad input and so answers 500. No recipient field nests at all.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
