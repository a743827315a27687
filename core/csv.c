/* CSV fields in and out: see include/strata/csv.h. */
#include <string.h>

#include "strata/csv.h"

void strata_csv_write_field(FILE *f, const char *s)
{
	if (*s && !strpbrk(s, ",\"\n\r")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		if (*s == '\n' || *s == '\r')
			fputs(" | ", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

int strata_csv_split(char *line, char sep, char **fields, size_t max, char **bad)
{
	size_t len = strlen(line);
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		line[--len] = '\0';
	size_t n = 0;
	char *s = line;
	for (;;) {
		char *out = s;
		if (n < max)
			fields[n] = out;
		n++;
		if (*s == '"') {
			char *open = s++;
			for (;;) {
				if (!*s) {
					if (bad)
						*bad = open;
					return -1;
				}
				if (*s == '"' && s[1] == '"') {
					*out++ = '"';
					s += 2;
				} else if (*s == '"') {
					s++;
					break;
				} else {
					*out++ = *s++;
				}
			}
			while (*s && *s != sep)
				s++;
		} else {
			while (*s && *s != sep)
				*out++ = *s++;
		}
		char end = *s;
		*out = '\0';
		if (!end)
			return (int)n;
		s++;
	}
}
