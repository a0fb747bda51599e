/*
 * run_popen.c - popen streams read and written with stdio while the
 * program holds files open in the working directory (an image directory
 * under `ulfs run`): the commands popen starts use the image too, so the
 * program must not block on the pipe while holding it. Prints a
 * transcript that must equal the tmpfs run's.
 */
#include <stdio.h>

int main(void) {
    FILE *out = fopen("out", "w");
    FILE *p = popen("for i in 1 2 3 4 5 6 7 8 9 10; do cat in; done", "r");
    if (!out || !p) {
        perror("popen");
        return 1;
    }
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        fputs(line, out);
        n++;
    }
    int status = pclose(p);
    fclose(out);
    printf("read %d lines, status %d\n", n, status);
    FILE *w = popen("wc -l > counted", "w");
    for (int i = 0; i < 3000; i++)
        fprintf(w, "line %d\n", i);
    printf("pclose %d\n", pclose(w));
    FILE *c = fopen("counted", "r");
    if (c && fgets(line, sizeof line, c))
        printf("counted %s", line);
    return 0;
}
