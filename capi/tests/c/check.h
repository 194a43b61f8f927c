/* What the C tests share: a check that a call returns the code it should. */
#ifndef RSM_TEST_CHECK_H
#define RSM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define EXPECT(call, code)                                                          \
	do {                                                                        \
		int r_ = (call);                                                    \
		if (r_ != (code)) {                                                 \
			fprintf(stderr, "%s:%d: %s returned %d, expected %s (%d)\n",  \
			    __FILE__, __LINE__, #call, r_, #code, (int)(code));     \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

#define OK(call) EXPECT(call, RSM_SUCCESS)

#define ASSERT(cond)                                                                \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "%s:%d: %s is false\n", __FILE__, __LINE__,  \
			    #cond);                                                 \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

#endif
