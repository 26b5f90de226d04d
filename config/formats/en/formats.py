"""Dates and moments as the console writes them everywhere (Django's defaults for English read
"Nov. 27, 2026, 4:38 a.m."): ISO dates, and moments with their zone, as console.widgets.when writes them."""

DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
TIME_FORMAT = "H:i"
