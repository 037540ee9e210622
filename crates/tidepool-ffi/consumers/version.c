/* Prints the header's version and the library's: bin/c-install-check.sh
 * compares both with `pkg-config --modversion tidepool`. */
#include <stdio.h>
#include <tidepool.h>

int main(void) {
    printf("%d.%d.%d %s\n", TIDEPOOL_VERSION_MAJOR, TIDEPOOL_VERSION_MINOR,
           TIDEPOOL_VERSION_PATCH, tidepool_version());
    return 0;
}
